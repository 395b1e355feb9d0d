"""People in the loop: play either side of any environment in a terminal or a browser, run human
studies with durable storage, browse the episodes a training run saved, and export episodes.

One module per job: `records` (the episode record schema, JSONL), `game` (one person's episode
against a policy), `terminal` (`scope play --human`), `storage` (study storage in SQLite), `study`
(study files), `app` (the FastAPI app of `scope serve` and `scope view`), `episode_store`
(episodes saved by training), `export` (JSONL and Hugging Face `datasets`), `commands` (the CLI).
"""
