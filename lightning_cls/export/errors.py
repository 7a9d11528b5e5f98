"""The errors of the export package, in a module that imports nothing else of it."""


class ExportCheckError(RuntimeError):
    """An exported artifact, reloaded, does not reproduce the eager model's outputs."""


class AccuracyDropError(RuntimeError):
    """A quantized model lost more validation accuracy than allowed."""
