"""The serving kit of the image's two HTTPS programs, the admission webhook and the scheduler
extender: TLS with certificate reload, bounded bodies and parses, the per-client budget. Both
compose it; it imports no program."""
