from django.urls import path

from rtvi_monitor.audio import views as audio_views
from rtvi_monitor.evals import api as eval_api
from rtvi_monitor.evals import views as eval_views
from rtvi_monitor.reviews import views as review_views
from rtvi_monitor.sessions import api, views

urlpatterns = [
    path("sessions/", views.session_list, name="session_list"),
    path("sessions/<str:session_id>/", views.session_detail, name="session_detail"),
    path("sessions/<str:session_id>/scenario/", eval_views.scenario_from_call, name="eval_scenario_from_call"),
    path("sessions/<str:session_id>/review/", review_views.session_review, name="session_review"),
    path("reviews/", review_views.review_home, name="review_home"),
    path("reviews/queues/<int:pk>/", review_views.queue_detail, name="review_queue"),
    path("reviews/reasons/", review_views.review_reasons, name="review_reasons"),
    path("api/reviews/", review_views.reviews_json, name="api_reviews"),
    path("api/sessions/<str:session_id>/reviews/", review_views.session_reviews_json, name="api_session_reviews"),
    path("evals/<str:agent_key>/", eval_views.suite_page, name="eval_suite"),
    path("evals/<str:agent_key>/suite.zip", eval_views.suite_download, name="eval_suite_download"),
    path("evals/<str:agent_key>/gate/", eval_views.gate_page, name="eval_gate_page"),
    path("api/evals/runs/", eval_api.upload_run, name="api_eval_upload"),
    path("api/evals/<str:agent_key>/gate/", eval_api.gate_json, name="api_eval_gate"),
    path("api/evals/<str:agent_key>/runs/", eval_api.runs_json, name="api_eval_runs"),
    path("api/sessions/", api.session_list, name="api_session_list"),
    path("api/sessions/<str:session_id>/", api.session_detail_json, name="api_session_detail"),
    path("api/sessions/<str:session_id>/traces/", api.session_traces_json, name="api_session_traces"),
    path("api/sessions/<str:session_id>/turns/", api.session_turns_json, name="api_session_turns"),
    path("api/sessions/<str:session_id>/platform/", api.session_platform_json, name="api_session_platform"),
    path("api/sessions/<str:session_id>/control/", api.session_control_json, name="api_session_control"),
    path("api/sessions/<str:session_id>/end/", api.session_end, name="api_session_end"),
    path("api/sessions/<str:session_id>/send-text/", api.session_send_text, name="api_session_send_text"),
    path("api/sessions/<str:session_id>/events.ndjson", api.session_events_ndjson, name="api_session_events"),
    path("api/sessions/<str:session_id>/events/", api.session_events_page, name="api_session_events_page"),
    path("api/sessions/<str:session_id>/events/<int:seq>/", api.session_event, name="api_session_event"),
    path("api/sessions/<str:session_id>/audio/", audio_views.session_audio, name="api_session_audio"),
    path("api/sessions/<str:session_id>/audio/peaks/", audio_views.session_audio_peaks, name="api_session_audio_peaks"),
    path("api/sessions/<str:session_id>/audio.wav", audio_views.session_audio_wav, name="api_session_audio_wav"),
    path(
        "api/sessions/<str:session_id>/audio/played/",
        audio_views.session_audio_played,
        name="api_session_audio_played",
    ),
    path("ingest/audio/<str:session_id>/", audio_views.ingest_status, name="ingest_audio"),
    path("ingest/audio/<str:session_id>/<str:track>/<int:index>", audio_views.ingest_chunk, name="ingest_audio_chunk"),
    path("metrics", api.prometheus, name="metrics"),
]
