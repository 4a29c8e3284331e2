"""This module owns the name server's request handling (namesrv/.../processor/DefaultRequestProcessor.java).

Each handler turns a RemotingCommand (RocketMQ's header field names in ext_fields, JSON bodies) into one
RouteInfoManager call and builds the response. Bad input never escapes as an exception: a missing header field
or an undecodable body answers SYSTEM_ERROR with a remark naming the problem (Java answers the same code from
the RemotingCommandException decodeCommandCustomHeader / JSON decoding throws).

Time is read from ``clock_ms`` (a function) so the handlers stay deterministic under test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from reference_broker.common.crc import crc32
from reference_broker.namesrv.kv_config import KVConfigManager
from reference_broker.namesrv.route_info import DataVersion, RouteInfoManager
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response, json_dumps, json_loads
from reference_broker.remoting.server import ConnectionContext, RemotingServer

log = logging.getLogger(__name__)

# FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), appended to the TOPIC_NOT_EXIST remark.
APPLY_TOPIC_SUGGESTION: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class BadRequest(Exception):
    """The request cannot be decoded; its message becomes the SYSTEM_ERROR remark."""


def _field(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        # The message 4.9.8's decodeCommandCustomHeader builds (and only logs) for a missing @CFNotNull field.
        raise BadRequest(f"the custom field <{name}> is null")
    return value


def _long_field(cmd: RemotingCommand, name: str) -> int:
    value = _field(cmd, name)
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"the custom field <{name}> is not a number: {value!r}") from None


def _crc32(body: bytes) -> int:
    return crc32(body)  # UtilAll.crc32


_KV_CODES: Final = frozenset({RequestCode.PUT_KV_CONFIG, RequestCode.GET_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
                              RequestCode.GET_KVLIST_BY_NAMESPACE})


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class NamesrvProcessor:
    def __init__(self, route_info: RouteInfoManager, clock_ms: Callable[[], int] = wall_clock_ms,
                 kv_config: KVConfigManager | None = None) -> None:
        self.route_info = route_info
        self.clock_ms = clock_ms
        self.kv_config = kv_config if kv_config is not None else KVConfigManager(None)
        # brokerAddr -> the connection it last registered over (BrokerLiveInfo.channel): its close is the
        # broker's end (BrokerHousekeepingService.onChannelClose → RouteInfoManager.onChannelDestroy).
        self.broker_channels: dict[str, object] = {}

    def register_with(self, server: RemotingServer) -> None:
        for code in _KV_CODES:
            server.register(code, self.handle)
        server.register(RequestCode.REGISTER_BROKER, self.handle)
        server.register(RequestCode.UNREGISTER_BROKER, self.handle)
        server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.handle)
        server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.handle)
        server.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.handle)

    async def handle(self, ctx: ConnectionContext | None, cmd: RemotingCommand) -> RemotingCommand:
        response = self.process(cmd)
        if ctx is not None and response.code == ResponseCode.SUCCESS:
            addr = cmd.ext_fields.get("brokerAddr", "")
            if cmd.code == RequestCode.REGISTER_BROKER:
                self.broker_channels[addr] = ctx
            elif cmd.code == RequestCode.UNREGISTER_BROKER:
                self.broker_channels.pop(addr, None)
        return response

    def on_channel_close(self, ctx: object) -> None:
        """RouteInfoManager.onChannelDestroy: every broker that registered over this connection is gone."""
        for addr in [a for a, c in self.broker_channels.items() if c is ctx]:
            del self.broker_channels[addr]
            log.info("the broker's channel destroyed, %s: remove it from the routes", addr)
            self.route_info.on_broker_gone(addr)

    def process(self, cmd: RemotingCommand) -> RemotingCommand:
        """Answer one request; synchronous, never raises."""
        try:
            if cmd.code == RequestCode.REGISTER_BROKER:
                return self._register_broker(cmd)
            if cmd.code in _KV_CODES:
                return self._kv(cmd)
            if cmd.code == RequestCode.UNREGISTER_BROKER:
                return self._unregister_broker(cmd)
            if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                return self._get_route_info_by_topic(cmd)
            if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                return self._get_broker_cluster_info(cmd)
            if cmd.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
                # RouteInfoManager.getAllTopicList: TopicList JSON
                topics = sorted(self.route_info.topic_queue_table)
                return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps({"topicList": topics}))
            return create_response(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                   f" request type {cmd.code} not supported")
        except BadRequest as exc:
            log.warning("bad request (code %d): %s", cmd.code, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:  # our bug; still an answer, never a dropped request
            log.exception("name server failed on a request with code %d", cmd.code)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def _register_broker(self, cmd: RemotingCommand) -> RemotingCommand:
        cluster = _field(cmd, "clusterName")
        addr = _field(cmd, "brokerAddr")
        name = _field(cmd, "brokerName")
        ha_addr = _field(cmd, "haServerAddr")
        broker_id = _long_field(cmd, "brokerId")
        crc_text = cmd.ext_fields.get("bodyCrc32", "0")
        try:
            body_crc = int(crc_text)
        except ValueError:
            raise BadRequest(f"the custom field <bodyCrc32> is not a number: {crc_text!r}") from None
        if body_crc != 0 and _crc32(cmd.body) != body_crc:
            log.warning("receive registerBroker request, crc32 not match")
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if cmd.ext_fields.get("compressed", "false").lower() == "true":
            raise BadRequest("compressed RegisterBrokerBody is not supported by this name server")

        topic_config, data_version, filter_servers = self._decode_register_body(cmd.body)
        try:
            result = self.route_info.register_broker(
                cluster, addr, name, broker_id, ha_addr, topic_config, data_version, self.clock_ms(),
                filter_server_list=filter_servers,
            )
        except ValueError as exc:
            raise BadRequest(f"bad RegisterBrokerBody: {exc}") from None
        ext: dict[str, str] = {}
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        return create_response(cmd, ResponseCode.SUCCESS, None, ext)

    @staticmethod
    def _decode_register_body(body: bytes) -> tuple[dict[str, Any], DataVersion, list[str] | None]:
        """RegisterBrokerBody JSON, or a bare TopicConfigSerializeWrapper (brokers before V3_0_11)."""
        if not body:
            return {}, DataVersion(), None  # Java: an empty wrapper with dataVersion 0/0
        try:
            obj = json_loads(body)
        except ValueError as exc:
            raise BadRequest(f"RegisterBrokerBody is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise BadRequest("RegisterBrokerBody must be a JSON object")
        filter_servers: list[str] | None = None
        if "topicConfigSerializeWrapper" in obj or "filterServerList" in obj:
            wrapper = obj.get("topicConfigSerializeWrapper") or {}
            raw_filters = obj.get("filterServerList")
            if raw_filters is not None:
                if not isinstance(raw_filters, list) or not all(isinstance(s, str) for s in raw_filters):
                    raise BadRequest("filterServerList must be a list of strings")
                filter_servers = raw_filters
        else:
            wrapper = obj
        if not isinstance(wrapper, dict):
            raise BadRequest("topicConfigSerializeWrapper must be a JSON object")
        table = wrapper.get("topicConfigTable") or {}
        if not isinstance(table, dict):
            raise BadRequest("topicConfigTable must be a JSON object")
        try:
            version = DataVersion.from_json(wrapper.get("dataVersion"))
        except ValueError as exc:
            raise BadRequest(f"bad RegisterBrokerBody: {exc}") from None
        return table, version, filter_servers

    def _unregister_broker(self, cmd: RemotingCommand) -> RemotingCommand:
        cluster = _field(cmd, "clusterName")
        addr = _field(cmd, "brokerAddr")
        name = _field(cmd, "brokerName")
        broker_id = _long_field(cmd, "brokerId")
        self.route_info.unregister_broker(cluster, addr, name, broker_id)
        return create_response(cmd, ResponseCode.SUCCESS)

    def _get_route_info_by_topic(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = _field(cmd, "topic")
        route = self.route_info.pick_topic_route_data(topic)
        if route is None:
            return create_response(
                cmd, ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}{APPLY_TOPIC_SUGGESTION}",
            )
        return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps(route))

    def _kv(self, cmd: RemotingCommand) -> RemotingCommand:
        """DefaultRequestProcessor.putKVConfig / getKVConfig / deleteKVConfig / getKVListByNamespace."""
        kv = self.kv_config
        namespace = _field(cmd, "namespace")
        if cmd.code == RequestCode.GET_KVLIST_BY_NAMESPACE:
            table = kv.namespace(namespace)
            if table is None:
                return create_response(cmd, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
            return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps({"table": table}))  # KVTable
        key = _field(cmd, "key")
        if cmd.code == RequestCode.PUT_KV_CONFIG:
            kv.put(namespace, key, _field(cmd, "value"))
        elif cmd.code == RequestCode.DELETE_KV_CONFIG:
            kv.delete(namespace, key)
        else:
            value = kv.get(namespace, key)
            if value is None:
                return create_response(cmd, ResponseCode.QUERY_NOT_FOUND,
                                       f"No config item, Namespace: {namespace} Key: {key}")
            return create_response(cmd, ResponseCode.SUCCESS, None, {"value": value})
        return create_response(cmd, ResponseCode.SUCCESS)

    def _get_broker_cluster_info(self, cmd: RemotingCommand) -> RemotingCommand:
        return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps(self.route_info.get_all_cluster_info()))
