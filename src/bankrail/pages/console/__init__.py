"""The developer console (`/console`): merchant and operator views."""
