"""Board-compatible Python API: `from hobot_dnn import pyeasy_dnn as dnn`."""
