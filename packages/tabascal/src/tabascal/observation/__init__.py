"""Where the array and the satellites are: the geometry of the sky and the Earth
(``geometry``), orbits from two-line elements (``tle``) and station positions (``stations``)."""
