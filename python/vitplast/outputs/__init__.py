"""What the commands write for people to read: the plotting style, terminal-safe text."""
