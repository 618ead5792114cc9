"""Validating admission webhook for Hygon DCU partition requests.

It refuses, at pod creation, the requests the node allocator could never serve (a failed
Allocate ends a pod with UnexpectedAdmissionError and is never retried). Entry point:
``hygon_dcu_plugin.webhook.server.main(argv)``; the rules themselves are the pure function
``hygon_dcu_plugin.pod_rules.check_pod``.
"""
