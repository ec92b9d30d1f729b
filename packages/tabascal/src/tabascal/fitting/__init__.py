"""Fitting: the optimiser and its checkpoints (``optimiser``), the ``tabascal run`` job
(``job``), its results written block by block (``results``) and plots (``plots``)."""
