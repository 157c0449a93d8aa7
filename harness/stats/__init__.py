"""The numbers a run reports and compares: per-(model, task) figures from scored samples (``aggregate``), standard
errors, intervals and exact tests (``estimates``), accuracy tests between two result sets (``significance``) and the
split of a speed ratio into its factors (``attribution``). Pure functions of records; no I/O."""
