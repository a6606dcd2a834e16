"""The artifact store's wire format: the subset of the S3 REST API a training job's checkpoint
publishing uses, so that a script reaches the store with plain HTTP (``urllib``) or any S3 client
pointed at ``AWS_ENDPOINT_URL_S3``, the way production code reaches an object store.

- ``PUT /BUCKET/KEY`` (body: the object, ``Content-Length`` required): 200, ``ETag`` the body's MD5;
- ``GET /BUCKET/KEY``, ``HEAD /BUCKET/KEY``: the object, or 404 ``NoSuchKey``;
- ``DELETE /BUCKET/KEY``: 204, whether or not the key existed (as S3 answers);
- ``GET /BUCKET?list-type=2[&prefix=P]`` (or plain ``GET /BUCKET``): a ``ListBucketResult``;
- errors: an ``<Error>`` document with ``Code`` and ``Message``, S3's codes.

Requests are not signed: the store is reachable only from inside the job's sandbox, and an
``Authorization`` header is ignored. Keys are flat (no ``/``): the server keeps each object as one
file in its folder. One bucket per store, named by the exercise's manifest.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_BUCKET = "checkpoints"
ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"  # the name the AWS SDKs and CLI read the S3 endpoint from
NS = "http://s3.amazonaws.com/doc/2006-03-01/"
KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")  # flat: no folders, no hidden names
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's bucket naming rule, in short
KEY_RULE = "a key is letters, digits, '.', '_' and '-', not starting with '.' (this store keeps no folders)"


def valid_key(key: str) -> bool:
    return bool(KEY.match(key)) and key not in (".", "..")


@dataclass(frozen=True)
class Target:
    """What a request names: ``bucket`` (None: no bucket in the path), ``key`` (None: the bucket
    itself), and the query's ``prefix``."""

    bucket: str | None
    key: str | None
    prefix: str = ""


def parse_target(target: str) -> Target:
    parts = urlsplit(target)
    path = unquote(parts.path)
    query = parse_qs(parts.query)
    bucket, _, key = path.lstrip("/").partition("/")
    return Target(bucket or None, key if key else None, (query.get("prefix") or [""])[0])


def error_xml(code: str, message: str, resource: str = "") -> bytes:
    root = ET.Element("Error")
    for tag, text in (("Code", code), ("Message", message), ("Resource", resource)):
        ET.SubElement(root, tag).text = text
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def error_message(body: bytes) -> str:
    """The ``Code: Message`` of an S3 error document, or its first bytes when it is not one."""
    try:
        root = ET.fromstring(body)
        return f"{root.findtext('Code', '')}: {root.findtext('Message', '')}".strip(": ")
    except ET.ParseError:
        return body[:200].decode(errors="replace")


def http_date(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


def listing_xml(bucket: str, prefix: str, objects: list[tuple[str, int, str, float]]) -> bytes:
    """A ListObjectsV2 answer for ``(key, size, md5, mtime)`` objects, all on one page."""
    ET.register_namespace("", NS)
    root = ET.Element(f"{{{NS}}}ListBucketResult")
    for tag, text in (("Name", bucket), ("Prefix", prefix), ("KeyCount", str(len(objects))),
                      ("MaxKeys", "1000"), ("IsTruncated", "false")):
        ET.SubElement(root, f"{{{NS}}}{tag}").text = text
    for key, size, md5, t in objects:
        c = ET.SubElement(root, f"{{{NS}}}Contents")
        ET.SubElement(c, f"{{{NS}}}Key").text = key
        ET.SubElement(c, f"{{{NS}}}LastModified").text = datetime.fromtimestamp(t, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
        ET.SubElement(c, f"{{{NS}}}ETag").text = f'"{md5}"'
        ET.SubElement(c, f"{{{NS}}}Size").text = str(size)
        ET.SubElement(c, f"{{{NS}}}StorageClass").text = "STANDARD"
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def listed_keys(body: bytes) -> list[str]:
    """The keys of a ``ListBucketResult``, in its order."""
    return [k.text or "" for k in ET.fromstring(body).iter(f"{{{NS}}}Key")]
