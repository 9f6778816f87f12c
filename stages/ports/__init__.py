"""What stages and actions call: one Protocol per service, with the values and key rules it shares.
Ports import no adapter."""
