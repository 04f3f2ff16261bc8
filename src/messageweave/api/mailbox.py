"""Mailbox routes: `/reconcile`, `/push/jmap`, `/api/push/register`, `/api/push/disable`."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
