"""The gRPC face of railyard: ``extender.api.v1.Extender`` plus standard health and reflection.

    servicer.py   decode protobuf -> service -> encode, nothing else
    errors.py     the one place exceptions become status codes (an interceptor)
    server.py     grpc.server with TLS / mTLS (certificates re-read on change), health, reflection

Never imports the HTTP or k8s adapters (tests/test_layers.py).
"""
