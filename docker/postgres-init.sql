-- Runs once, when the PostgreSQL volume is first initialised. The MLflow database is created by
-- POSTGRES_DB; this adds the one for Optuna studies (search.storage), owned by the same user.
CREATE DATABASE optuna;
