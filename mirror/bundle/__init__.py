"""Bundle wing: mirror -> one signed artifact that crosses the air gap (selection, target repos, tar, zipapp, SBOM, CLI)."""
