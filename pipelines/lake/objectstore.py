"""Lakes and crawls on S3: one spelling of a location per engine, and credentials checked early.

Users write ``s3://bucket/...`` or ``s3a://bucket/...``; each engine gets the scheme it speaks:
Spark (Hadoop's S3A) and Delta's log store ``s3a://`` (so that a table has one path, which Delta's
DynamoDB commit entries are keyed by), fsspec/s3fs and pyarrow ``s3://``; deltalake takes both.
Credentials and the endpoint come from the standard AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL``,
``AWS_REGION``), a profile or an instance role; crawlake never writes them anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

S3_SCHEMES = ("s3://", "s3a://", "s3n://")


def is_s3(url: str) -> bool:
    return url.startswith(S3_SCHEMES)


def for_spark(url: str) -> str:
    """``s3://``/``s3n://`` → ``s3a://``; anything else as it is."""
    for scheme in ("s3://", "s3n://"):
        if url.startswith(scheme):
            return "s3a://" + url[len(scheme):]
    return url


def for_arrow(url: str) -> str:
    """``s3a://``/``s3n://`` → ``s3://`` (fsspec, pyarrow); anything else as it is."""
    for scheme in ("s3a://", "s3n://"):
        if url.startswith(scheme):
            return "s3://" + url[len(scheme):]
    return url


def require_credentials(urls: Iterable[str]) -> None:
    """Raise ValueError naming what to set when one of ``urls`` is on S3 and no AWS credentials
    can be found (environment, profile, instance role), before any Spark work. The message
    names variables, never values."""
    s3 = [u for u in urls if u and is_s3(u)]
    if not s3:
        return
    import botocore.session

    if botocore.session.get_session().get_credentials() is None:
        raise ValueError(
            f"{s3[0]} is on S3 and no AWS credentials were found: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or AWS_PROFILE, or run "
            "where an instance role applies; for an S3-compatible server also set AWS_ENDPOINT_URL")
