"""Where the array and the satellites are: the geometry of the sky and the Earth
(``geometry``), orbits from two-line elements (``tle``), station positions (``stations``) and
the station beam (``beam``)."""
