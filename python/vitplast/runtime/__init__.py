"""Where and how a command computes: the device, the distributed context, autocast precision."""
