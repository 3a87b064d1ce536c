"""LiteLLM reads its model cost map from the package, not from the network (it fetches it at import otherwise)."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
