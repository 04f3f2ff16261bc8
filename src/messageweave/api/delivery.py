"""Delivery routes: `/webhook/tg`, `/worker`, and the operator's queue/DLQ API."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
