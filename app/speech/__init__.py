"""Voice input: a recording (WAV) turned into text by a local speech-recognition model (Whisper on transformers),
never sent anywhere. audio.py reads the recording, transcriber.py loads the model the library found and writes the
text, chunk by chunk, saying how far it is."""
