"""Every SQL statement the job stores run: one source per dialect family."""
