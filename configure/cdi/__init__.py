"""CDI: the spec we write, NVIDIA's refresh units, the specs in effect, and the node's CDI source."""
