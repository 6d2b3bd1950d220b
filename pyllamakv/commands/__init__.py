"""The ``pyllamakv`` command line."""
