"""Typed options of the commands: the option-field machinery (flags, defaults, checks and wording from one
dataclass), the groups every command composes (model, data, optimisation, runtime) and the CLI conventions."""
