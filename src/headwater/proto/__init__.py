"""Generated Protobuf code of the contracts in proto/ (do not edit)."""
