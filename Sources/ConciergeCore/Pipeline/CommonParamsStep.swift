/// Request path, common params: adds `common.headers` and `common.params`. A value the client sent
/// itself wins, so an app can still override one for a single call.
public struct CommonParamsStep: Sendable {
    public let common: ConciergeConfig.Common

    public init(common: ConciergeConfig.Common) {
        self.common = common
    }

    public func apply(to request: inout ProxyRequest) {
        for header in common.headers where !request.headers.contains(name: header.name) {
            request.headers.add(name: header.name, value: header.value)
        }
        for param in common.params {
            request.setParam(param.name, param.value, onlyIfAbsent: true)
        }
    }
}
