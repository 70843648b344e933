"""Recordings in S3-compatible storage (django-storages' S3Storage), against an S3 stand-in at its HTTP boundary:
moto's server on loopback speaks S3's REST API; boto3 talks to it as it would to AWS, MinIO or R2."""

import io
import json
import os
import subprocess
import sys
import warnings

import boto3
import numpy as np
import pytest
import soundfile
from django.core.files.storage import storages
from django.test import Client

from rtvi_monitor.audio.models import AudioChunk
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.sessions.models import Session
from tests.audio.test_audio import put
from tests.server import ROOT, free_port
from tests.speech import speak

# Chunks are stored on the audio thread, with its own connection: the test database is committed.
pytestmark = pytest.mark.usefixtures("live_path")

BUCKET = "acme-call-audio"
CREDENTIALS = {"aws_access_key_id": "test-key", "aws_secret_access_key": "test-secret", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_audio(settings, s3_endpoint):
    boto3.client("s3", endpoint_url=s3_endpoint, **CREDENTIALS).create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "audio": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": s3_endpoint,
                "access_key": CREDENTIALS["aws_access_key_id"],
                "secret_key": CREDENTIALS["aws_secret_access_key"],
                "region_name": "us-east-1",
                "location": "audio",
                "default_acl": None,
                "file_overwrite": False,
            },
        },
    }
    return boto3.client("s3", endpoint_url=s3_endpoint, **CREDENTIALS)


def test_a_recording_goes_to_s3_is_played_from_it_and_erased_from_it(
    org, api_key, s3_audio, django_capture_on_commit_callbacks
):
    org.record_audio = True
    org.save()
    token = IngestToken.issue(org, "bot")[1]
    call = Session.objects.create(organization=org, session_id="s3-call")
    words = speak("Your refund was sent this morning.")
    assert put(token, "s3-call", "bot", 0, words).status_code == 201
    assert put(token, "s3-call", "bot", 0, words).json()["duplicate"] is True
    (chunk,) = AudioChunk.objects.all()
    keys = [o["Key"] for o in s3_audio.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys == [f"audio/{chunk.path}"]
    stored = s3_audio.get_object(Bucket=BUCKET, Key=keys[0])["Body"].read()
    decoded, _ = soundfile.read(io.BytesIO(stored), dtype="int16")
    assert np.array_equal(decoded, words)  # FLAC in the bucket, lossless
    assert storages["audio"].exists(chunk.path)

    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    response = Client().get("/api/sessions/s3-call/audio.wav", HTTP_RANGE="bytes=44-", **auth)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pcm = np.frombuffer(b"".join(response), dtype="<i2").reshape(-1, 2)
    assert response.status_code == 206 and np.array_equal(pcm[:, 1], words) and not pcm[:, 0].any()

    call.status = Session.Status.ENDED
    call.save()
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().delete("/api/sessions/s3-call/", **auth)
    assert response.status_code == 200 and response.json()["audio_chunks"] == 1
    assert "Contents" not in s3_audio.list_objects_v2(Bucket=BUCKET)  # erased from the bucket too


def test_s3_calls_have_explicit_timeouts_and_bounded_retries():
    """The settings' S3 storage (AUDIO_S3_BUCKET) gives boto3 timeouts and retries of its own, not botocore's 60 s."""
    code = (
        "import json; from dashboard import settings as s; c = s.STORAGES['audio']['OPTIONS']['client_config'];"
        " print(json.dumps([c.connect_timeout, c.read_timeout, c.retries]))"
    )
    env = {**os.environ, "AUDIO_S3_BUCKET": "calls", "AUDIO_S3_TIMEOUT": "4", "AUDIO_S3_ATTEMPTS": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.splitlines()[-1]) == [4.0, 4.0, {"mode": "standard", "max_attempts": 2}]
