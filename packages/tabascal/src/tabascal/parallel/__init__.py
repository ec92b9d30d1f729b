"""Splitting a fit over devices and processes: the baseline axis (``baseline_axis``), the
model built block by block from the rows each process reads (``blockwise``), the source axis
(``source_axis``) and the processes of a multi-host run (``processes``)."""
