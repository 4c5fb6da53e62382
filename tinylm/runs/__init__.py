"""Run management: everything around a training run except the training itself.

- ``job``: the job wrapper behind ``train.py``; it calls ``tinylm.training.fit`` and owns the folder
  claim, resume, the SLURM requeue rule, the job's metrics and error files, and exit codes;
- ``folder``: run folders (unique names, the Hydra record, the overrides a run was made with);
- ``lock``: one process per run folder (its claim, ``tinylm.run_folder.MARKER``);
- ``resume``: ``ckpt_path=``: planning a resume and checking its checkpoint against the config;
- ``job_files``: the files a job leaves in its folder, and what they say of it;
- ``sweep_resume``, ``sweep_stop``: sweeps that survive interruption and stop cleanly;
- ``sweep_launch``: each job's config composed once; in parallel, the largest jobs first;
- ``sweep_workers``, ``sweep_fork_server``: parallel jobs in workers forked from a fork server that imported
  the training stack once, or in this process when only one job would run at a time;
- ``sweep_report``: ``python -m tinylm.runs.sweep_report <sweep folder>``.

``tinylm.training.fit`` imports nothing from here.
"""
