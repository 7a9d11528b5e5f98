"""Every drawing of the package (matplotlib frames, PIL paint): the run's plots (``plots``),
the prediction mosaic (``mosaic``), the doctor's tiles (``tiles``), the open-set report's
figures (``open_set``), the reliability diagram (``calibration``), heat-map overlays
(``overlay``), the sweep summary's picture (``sweep``), the LR finder's plot (``lr_finder``) and
what they share (``painting``).

Reached downward only: commands, callbacks, the training tasks, the doctor, ``explain`` and the
server import these modules; they import only ``inference`` (the decision objects a task hands
out, plain tensors and arrays), ``fileio`` and the drawing libraries, never a higher folder
(``tests/test_import_graph.py``). Nothing is imported here: ``import lightning_cls.figures``
loads no matplotlib.
"""
