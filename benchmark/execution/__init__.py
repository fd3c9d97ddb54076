"""How cells are executed: serially or on Ray, with stop requests and the --time-limit."""
