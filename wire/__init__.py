"""What a node and the server both speak: the 12 load metrics (``catalog``), the sample batch (``samples``), the
control state both ways (``control``), the answers' refusals and field errors, and how an engine's Prometheus
exposition becomes load metrics (``scrape``). The room below every other: it imports none of ours, and
``fleetpilot[agent]`` installs it without any of the server's rooms."""
