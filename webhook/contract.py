"""Names that are part of batchgate's public contract (PRODUCT.md): users and admins type these."""

GROUP = "batchgate.io"
API_VERSION = f"{GROUP}/v1alpha1"
QUEUE_LABEL = f"{GROUP}/queue"
TIME_LIMIT_ANNOTATION = f"{GROUP}/time-limit"
EXCLUSIVE_LABEL = f"{GROUP}/exclusive"
