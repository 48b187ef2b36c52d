from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AnyValue(_message.Message):
    __slots__ = ("string_value", "bool_value", "int_value", "double_value", "array_value", "kvlist_value", "bytes_value")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    ARRAY_VALUE_FIELD_NUMBER: _ClassVar[int]
    KVLIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    bool_value: bool
    int_value: int
    double_value: float
    array_value: ArrayValue
    kvlist_value: bytes
    bytes_value: bytes
    def __init__(self, string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., array_value: _Optional[_Union[ArrayValue, _Mapping]] = ..., kvlist_value: _Optional[bytes] = ..., bytes_value: _Optional[bytes] = ...) -> None: ...

class ArrayValue(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[AnyValue]
    def __init__(self, values: _Optional[_Iterable[_Union[AnyValue, _Mapping]]] = ...) -> None: ...

class SpanView(_message.Message):
    __slots__ = ("trace_id", "span_id", "parent_span_id", "name", "start_time_unix_nano", "end_time_unix_nano", "attributes", "status")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AnyValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AnyValue, _Mapping]] = ...) -> None: ...
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    END_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: _containers.MessageMap[str, AnyValue]
    status: StatusView
    def __init__(self, trace_id: _Optional[bytes] = ..., span_id: _Optional[bytes] = ..., parent_span_id: _Optional[bytes] = ..., name: _Optional[str] = ..., start_time_unix_nano: _Optional[int] = ..., end_time_unix_nano: _Optional[int] = ..., attributes: _Optional[_Mapping[str, AnyValue]] = ..., status: _Optional[_Union[StatusView, _Mapping]] = ...) -> None: ...

class StatusView(_message.Message):
    __slots__ = ("code",)
    CODE_FIELD_NUMBER: _ClassVar[int]
    code: int
    def __init__(self, code: _Optional[int] = ...) -> None: ...

class ScopeSpansView(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[SpanView]
    def __init__(self, spans: _Optional[_Iterable[_Union[SpanView, _Mapping]]] = ...) -> None: ...

class ResourceSpansView(_message.Message):
    __slots__ = ("scope_spans",)
    SCOPE_SPANS_FIELD_NUMBER: _ClassVar[int]
    scope_spans: _containers.RepeatedCompositeFieldContainer[ScopeSpansView]
    def __init__(self, scope_spans: _Optional[_Iterable[_Union[ScopeSpansView, _Mapping]]] = ...) -> None: ...

class ExportTraceRequestView(_message.Message):
    __slots__ = ("resource_spans",)
    RESOURCE_SPANS_FIELD_NUMBER: _ClassVar[int]
    resource_spans: _containers.RepeatedCompositeFieldContainer[ResourceSpansView]
    def __init__(self, resource_spans: _Optional[_Iterable[_Union[ResourceSpansView, _Mapping]]] = ...) -> None: ...

class SpanEntries(_message.Message):
    __slots__ = ("trace_id", "span_id", "parent_span_id", "name", "start_time_unix_nano", "end_time_unix_nano", "attributes", "status")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    END_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: bytes
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: _containers.RepeatedScalarFieldContainer[bytes]
    status: StatusView
    def __init__(self, trace_id: _Optional[bytes] = ..., span_id: _Optional[bytes] = ..., parent_span_id: _Optional[bytes] = ..., name: _Optional[bytes] = ..., start_time_unix_nano: _Optional[int] = ..., end_time_unix_nano: _Optional[int] = ..., attributes: _Optional[_Iterable[bytes]] = ..., status: _Optional[_Union[StatusView, _Mapping]] = ...) -> None: ...

class ScopeSpansEntries(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[SpanEntries]
    def __init__(self, spans: _Optional[_Iterable[_Union[SpanEntries, _Mapping]]] = ...) -> None: ...

class ResourceSpansEntries(_message.Message):
    __slots__ = ("scope_spans",)
    SCOPE_SPANS_FIELD_NUMBER: _ClassVar[int]
    scope_spans: _containers.RepeatedCompositeFieldContainer[ScopeSpansEntries]
    def __init__(self, scope_spans: _Optional[_Iterable[_Union[ScopeSpansEntries, _Mapping]]] = ...) -> None: ...

class ExportTraceRequestEntries(_message.Message):
    __slots__ = ("resource_spans",)
    RESOURCE_SPANS_FIELD_NUMBER: _ClassVar[int]
    resource_spans: _containers.RepeatedCompositeFieldContainer[ResourceSpansEntries]
    def __init__(self, resource_spans: _Optional[_Iterable[_Union[ResourceSpansEntries, _Mapping]]] = ...) -> None: ...

class RawKeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: RawAnyValue
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[_Union[RawAnyValue, _Mapping]] = ...) -> None: ...

class RawAnyValue(_message.Message):
    __slots__ = ("string_value", "bool_value", "int_value", "double_value", "array_value", "kvlist_value", "bytes_value")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    ARRAY_VALUE_FIELD_NUMBER: _ClassVar[int]
    KVLIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: bytes
    bool_value: bool
    int_value: int
    double_value: float
    array_value: RawArrayValue
    kvlist_value: bytes
    bytes_value: bytes
    def __init__(self, string_value: _Optional[bytes] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., array_value: _Optional[_Union[RawArrayValue, _Mapping]] = ..., kvlist_value: _Optional[bytes] = ..., bytes_value: _Optional[bytes] = ...) -> None: ...

class RawArrayValue(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[RawAnyValue]
    def __init__(self, values: _Optional[_Iterable[_Union[RawAnyValue, _Mapping]]] = ...) -> None: ...
