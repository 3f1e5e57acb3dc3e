"""The system layer: communicator groups, collective matching and algorithms."""
