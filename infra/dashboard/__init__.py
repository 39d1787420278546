"""`rtrl dashboard`: the Streamlit app over the state dir (A/B store, reward cycle manifests, data-quality and gate
reports) and the MLflow registry. `app.py` is the Streamlit script, `data.py` reads the files, `demo_state.py`
writes a demo-like state dir for tests. Nothing here is imported by the CLI until the command runs."""
