"""The built-in network models, one module each; :data:`~etsim.network.model.NETWORK_MODELS` imports them all."""

__all__: list[str] = []
