"""The built-in topology kinds, one module each; :data:`~etsim.network.builders.TOPOLOGY_BUILDERS` imports them all."""
