"""What the commands share: the model builder, data, checkpoints, run directories and output sets, the
distributed context, argument types, plots. Imports only ``vitplast_kernels`` (never a command or ``cli``)."""
