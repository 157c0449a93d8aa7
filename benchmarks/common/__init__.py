"""What every benchmark shares, in one place: networks and their wrappers (``networks``, ``regimes``), the
interleaved timer (``timing``), the table printer (``table``) and the verdict record (``verdict``)."""
