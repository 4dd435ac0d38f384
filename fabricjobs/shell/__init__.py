"""The interactive shell and the non-interactive runner (``fabricjobs shell``)."""
