"""What a page asks for when it finds it missed live messages (static/js/run.js): the run's event
messages after the last one it applied, shaped as they were sent (webapp/runs/live.py), and the
run's studio number now (webapp/runs/studio_seq.py), the base it counts studio messages from."""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from . import live, studio_seq, visibility


def missed_events(request: HttpRequest, run_id: int) -> JsonResponse:
    """GET runs/<id>/events.json?after=N[&until=U][&limit=M]: ``messages`` (N < seq <= U, oldest
    first, at most M, 500 by default), ``more`` (whether more follow), ``last`` (the run's last
    seq) and ``sseq``. A page that sees a gap asks for the gap alone (``until``): what came after
    it holds already. Any viewer of the run, share links included."""
    run, _ = visibility.run_for(request.user, run_id)
    try:
        after = int(request.GET.get("after", "0"))
        until = int(request.GET["until"]) if request.GET.get("until") else None
        limit = int(request.GET.get("limit", str(live.CATCH_UP_LIMIT)))
    except ValueError:
        return JsonResponse({"error": "after, until and limit must be whole numbers"}, status=400)
    if after < 0 or not 1 <= limit <= live.CATCH_UP_LIMIT or (until is not None and until < after):
        return JsonResponse({"error": f"after must be 0 or more, until no less than after, limit between 1 and "
                                      f"{live.CATCH_UP_LIMIT}"}, status=400)
    # Read first: a studio message after this number reaches the page live or shows as a gap.
    sseq = studio_seq.current_sseq_sync(run.pk)
    messages, more = live.missed_messages(run, after, limit, until)
    last = run.events.order_by("-seq").values_list("seq", flat=True).first() or 0
    return JsonResponse({"messages": messages, "more": more, "last": last, "sseq": sseq})
