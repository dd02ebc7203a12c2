"""Download task types (kaiwo.silogen.ai/v1alpha1).

These describe what the download Job fetches before a workload starts:
objects from S3 / GCS / Azure Blob, Git repositories, and Hugging Face
repositories. They appear inside ``spec.storage`` of KaiwoJob/KaiwoService
and, aggregated as :class:`DownloadTaskConfig`, in the download ConfigMap
(``config.yaml``) that the ``kaiwo-ctrl download`` program reads.
"""

from __future__ import annotations

from api.base import ApiModel
from api.fields import field

SECRETS_MOUNT_ROOT = "/app/secrets"


class ValueReference(ApiModel):
    """Points at one key of a Kubernetes Secret holding a credential; the
    download Job mounts it as a file."""

    file: str | None = field(
        None,
        description=(
            "Path inside the download container where the secret value is mounted as a file. "
            "Normally left empty; the controller fills it from secretName and secretKey."
        ),
    )
    secret_name: str | None = field(None, description="Name of the Secret holding the value.")
    secret_key: str | None = field(None, description="Key inside the Secret whose value is used.")

    def default_file_path(self) -> str:
        """The mount path the controller assigns when ``file`` is empty:
        ``/app/secrets/<secretName>/<secretKey>``."""
        return f"{SECRETS_MOUNT_ROOT}/{self.secret_name or ''}/{self.secret_key or ''}"


class CloudDownloadFile(ApiModel):
    """A single object to fetch from a bucket or container."""

    path: str = field(description="Key of the source object inside the bucket/container, e.g. models/model.bin.")
    target_path: str = field(
        description="Destination path, file name included, relative to the data volume mount path."
    )


class CloudDownloadFolder(ApiModel):
    """A prefix (folder) to fetch from a bucket or container."""

    path: str = field(description="Source prefix inside the bucket/container, e.g. data/images/.")
    target_path: str = field(
        description="Destination directory, relative to the data volume mount path, that receives the folder contents."
    )
    glob: str | None = field(
        None, description="Optional file-name pattern (e.g. *.jpg); only matching objects under path are fetched."
    )


class CloudDownloadBucket(ApiModel):
    """One bucket (S3, GCS) or container (Azure) and what to fetch from it."""

    name: str = field(description="Bucket or container name.")
    files: list[CloudDownloadFile] | None = field(None, description="Individual objects to fetch.")
    folders: list[CloudDownloadFolder] | None = field(None, description="Prefixes (folders) to fetch.")


class S3DownloadItem(ApiModel):
    """Downloads from an S3-compatible object store."""

    endpoint_url: str = field(
        description="S3 API endpoint, e.g. https://s3.us-east-1.amazonaws.com or a MinIO URL."
    )
    access_key_id: ValueReference | None = field(
        None, description="Optional Secret reference holding the access key ID."
    )
    secret_key: ValueReference | None = field(
        None, description="Optional Secret reference holding the secret access key."
    )
    buckets: list[CloudDownloadBucket] = field(description="Buckets and the objects/prefixes to fetch from each.")


class GCSDownloadItem(ApiModel):
    """Downloads from Google Cloud Storage."""

    application_credentials: ValueReference = field(
        description="Secret reference holding the service-account key JSON."
    )
    buckets: list[CloudDownloadBucket] = field(description="Buckets and the objects/prefixes to fetch from each.")


class AzureBlobStorageDownloadItem(ApiModel):
    """Downloads from Azure Blob Storage."""

    connection_string: ValueReference = field(
        description="Secret reference holding the storage account connection string."
    )
    containers: list[CloudDownloadBucket] = field(
        description="Blob containers and the objects/prefixes to fetch from each."
    )


class GitDownloadItem(ApiModel):
    """Clones a Git repository (or copies one path of it) into the data volume."""

    repository: str = field(description="Repository URL, e.g. https://github.com/user/repo.git.")
    branch: str | None = field(None, description="Branch to clone; wins over commit when both are set.")
    commit: str | None = field(None, description="Commit to check out; ignored when branch is set.")
    username: ValueReference | None = field(None, description="Optional Secret reference holding the Git user name.")
    token: ValueReference | None = field(
        None, description="Optional Secret reference holding the Git token or password."
    )
    path: str | None = field(
        None, description="Sub-path of the repository to copy; the whole repository when empty."
    )
    target_path: str = field(
        description="Destination, relative to the data volume mount path, for the repository or its path."
    )


class HuggingFaceDownloadItem(ApiModel):
    """A Hugging Face Hub repository (or some of its files) to pre-cache."""

    repo_id: str = field(description="Hub repository ID, e.g. meta-llama/Llama-2-7b-chat-hf.")
    files: list[str] | None = field(
        None, description="Files to fetch from the repository; the whole repository when omitted."
    )


class ObjectStorageDownloadSpec(ApiModel):
    """Downloads into the data volume, grouped by source kind."""

    s3: list[S3DownloadItem] | None = field(None, description="S3 downloads.")
    gcs: list[GCSDownloadItem] | None = field(None, description="Google Cloud Storage downloads.")
    azure_blob: list[AzureBlobStorageDownloadItem] | None = field(None, description="Azure Blob Storage downloads.")
    git: list[GitDownloadItem] | None = field(None, description="Git repository downloads.")

    def is_empty(self) -> bool:
        return not (self.s3 or self.gcs or self.azure_blob or self.git)


class DownloadTaskConfig(ApiModel):
    """The document the controller writes to the download ConfigMap (key
    ``config.yaml``) and the download program reads. Not a CRD field."""

    download_root: str = field(
        "", description="Mount path of the data volume in the download container; empty when no data volume."
    )
    hf_home: str = field("", description="Mount path of the Hugging Face cache volume (HF_HOME); empty when none.")
    s3: list[S3DownloadItem] | None = field(None, description="S3 download tasks.")
    gcs: list[GCSDownloadItem] | None = field(None, description="GCS download tasks.")
    azure_blob: list[AzureBlobStorageDownloadItem] | None = field(None, description="Azure Blob download tasks.")
    git: list[GitDownloadItem] | None = field(None, description="Git download tasks.")
    hf: list[HuggingFaceDownloadItem] | None = field(None, description="Hugging Face pre-cache tasks.")


__all__ = [
    "AzureBlobStorageDownloadItem",
    "CloudDownloadBucket",
    "CloudDownloadFile",
    "CloudDownloadFolder",
    "DownloadTaskConfig",
    "GCSDownloadItem",
    "GitDownloadItem",
    "HuggingFaceDownloadItem",
    "ObjectStorageDownloadSpec",
    "S3DownloadItem",
    "SECRETS_MOUNT_ROOT",
    "ValueReference",
]
