"""Which in-image test folders each image runs: its own, then its parent's, up to `shared`.

The same idea as docker-stacks' tests/hierarchy/images_hierarchy.py. An image (a folder of
docker/images/) is tested with tests/images/<name>/ and every folder up its parent chain here;
`nox -s image_tests` reads the chain through docker/images.py, the in-image conftest through
this module. Standard library only: the host's nox loads it before any venv exists.
"""

from __future__ import annotations

# image -> the image whose tests it also runs (`shared`: every image's, the root).
PARENT: dict[str, str | None] = {
    "shared": None,
    "default": "shared",
    "gb10": "shared",
    # FlashQLA opted in on GB10: everything the gb10 image must hold, and what FlashQLA adds.
    "gb10-flashqla": "gb10",
}


def lineage(image: str) -> list[str]:
    """`image` and its ancestors, nearest first: gb10-flashqla -> [gb10-flashqla, gb10, shared]."""
    if image not in PARENT:
        raise KeyError(f"image {image!r} has no entry in tests/images/hierarchy.py PARENT: add it with its parent")
    chain = [image]
    while PARENT[chain[-1]] is not None:
        chain.append(PARENT[chain[-1]])
    return chain
