"""One module per vendor behind each port (mirroring :mod:`stages.ports`); only
:mod:`stages.services` imports them."""
