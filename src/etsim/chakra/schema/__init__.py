"""The Chakra protobuf schema (``et_def.proto``) and its generated module."""
