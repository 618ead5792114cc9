"""Generated kubelet API stubs (device plugin v1beta1, PodResources v1).

Do not edit the *_pb2* files: run plugin_image/tools/generate_stubs.py.
"""
