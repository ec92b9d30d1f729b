"""Planning a fit before it runs: compiled programs' memory and collectives (``memory``) and
every stage of a fit compiled from shapes alone (``stages``)."""
