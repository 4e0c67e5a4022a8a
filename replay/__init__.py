"""Load from real traces: the Azure request trace read and scaled to the built-in model (``trace_load``), and the
open-loop driver that plays a trace or a demand series at agents' serving APIs (``driver``, ``fleetpilot replay``;
the demo plays its day through it). A client of the serving API: it needs none of the server's rooms."""
