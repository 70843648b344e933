from django.urls import path

from rtvi_monitor import views

urlpatterns = [
    path("api/sessions/", views.session_list, name="api_session_list"),
    path("api/sessions/<str:session_id>/", views.session_detail_json, name="api_session_detail"),
    path("api/sessions/<str:session_id>/events.ndjson", views.session_events_ndjson, name="api_session_events"),
]
