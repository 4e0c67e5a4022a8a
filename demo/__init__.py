"""``fleetpilot demo``: the whole system on one machine — a server, three agents, a day of real demand compressed
into five minutes (``load``), the hours before it seeded as history (``history``), and what the printout says to
expect and when (``timeline``); ``run`` starts it all through the composition root's launch helpers."""
