"""The core's handles: the cffi binding and the Model / Context owners."""
