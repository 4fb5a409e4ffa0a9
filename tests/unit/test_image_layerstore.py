"""The engine's layer store, its parts that need no engine."""

from __future__ import annotations

from rocmforge.host.layerstore import chain_ids


def test_chain_ids_name_layers_as_the_engine_does():
    # Observed on Docker 20.10: the base's layer plus one `RUN echo hi > /hello` layer is stored
    # under layerdb/sha256/e113f00a… (chain ID = sha256 of "<parent chain ID> <diff ID>").
    base = "sha256:fe6236ade2f00c765c62fa88411c9a91014aaaca2ccc2cde9d5bafda12a6f310"
    top = "sha256:04d068e3294d8d5e38a31a4e5feab5a752d01e0d2c7f9e24963eadc4c5fe3420"
    assert chain_ids([base, top]) == [base, "sha256:e113f00a450c34e5baef9231cd8ad9f8f6f82107633a6a51e37bee1426ebc87b"]
