"""The model library's core: the models already on this machine (discovery), what each is (format, size,
parameters, context, what its chat template knows, licence) and whether it fits at a chosen context."""
