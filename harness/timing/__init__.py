"""Timing a decode the same way for every model: the decoder call alone with the device synchronised on both sides
(``clock``), the time spent inside the network's forwards (``forward_timer``), and peak memory."""
