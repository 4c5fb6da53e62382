"""The training job: the LightningModule, config checks, the run's logs, and config -> metrics."""
