"""The config of tests/scripts/cli_probe.py."""

import ml_collections


def get_config():
  return ml_collections.ConfigDict({'resolution': 4})
