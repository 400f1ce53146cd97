%% The relay benchmark's second reference (docs/bench.md, "Relay benchmark"): a Diameter
%% relay agent on Erlang/OTP's diameter application, as small as OTP allows. It listens
%% for the clients, connects to every server, and relays each request to a server picked
%% round robin (RFC 6733 §6.1.8 relaying: the diameter application adds the Route-Record
%% and keeps the Hop-by-Hop mapping). Messages are relayed undecoded (decode_format none).
%%
%% erl -noshell -noinput -pa DIR -run dra_bench_relay start \
%%     ListenIp ListenPort OriginHost OriginRealm ServerIp:Port ...
-module(dra_bench_relay).

-export([start/1]).
-export([peer_up/3, peer_down/3, pick_peer/4, prepare_request/3, prepare_retransmit/3,
         handle_answer/4, handle_error/4, handle_request/3]).

-define(SVC, dra_bench_relay).
-define(RELAY_APP_ID, 16#FFFFFFFF).

start([Ip, Port, Host, Realm | Servers]) ->
    ok = diameter:start(),
    ok = diameter:start_service(?SVC, [{'Origin-Host', Host},
                                       {'Origin-Realm', Realm},
                                       {'Vendor-Id', 0},
                                       {'Product-Name', "otp-relay"},
                                       {'Auth-Application-Id', [?RELAY_APP_ID]},
                                       {decode_format, none},
                                       {application, [{alias, relay},
                                                      {dictionary, diameter_gen_relay},
                                                      {module, ?MODULE}]}]),
    {ok, Addr} = inet:parse_address(Ip),
    {ok, _} = diameter:add_transport(?SVC, {listen,
                                            [{transport_module, diameter_tcp},
                                             {transport_config,
                                              [{reuseaddr, true},
                                               {ip, Addr},
                                               {port, list_to_integer(Port)}]}]}),
    lists:foreach(fun connect/1, Servers),
    io:format("otp relay: listening on ~s:~s~n", [Ip, Port]),
    receive stop -> ok end.

connect(HostPort) ->
    [H, P] = string:split(HostPort, ":", trailing),
    {ok, A} = inet:parse_address(H),
    {ok, _} = diameter:add_transport(?SVC, {connect,
                                            [{transport_module, diameter_tcp},
                                             {transport_config,
                                              [{raddr, A}, {rport, list_to_integer(P)},
                                               {reuseaddr, true}]},
                                             {connect_timer, 1000}]}),
    ok.

peer_up(_Svc, _Peer, State) -> State.
peer_down(_Svc, _Peer, State) -> State.

%% Servers only (the clients' Origin-Host starts with "client"), round robin.
pick_peer(Local, Remote, _Svc, _State) ->
    case [P || {_, Caps} = P <- Local ++ Remote, not is_client(remote_host(Caps))] of
        [] -> false;
        Cands ->
            N = erlang:phash2(erlang:unique_integer(), length(Cands)),
            {ok, lists:nth(N + 1, Cands)}
    end.

%% #diameter_caps{} (diameter.hrl, not shipped by Debian's erlang-diameter): origin_host is
%% its first field, a {Local, Remote} pair.
remote_host(Caps) when element(1, Caps) =:= diameter_caps ->
    case element(2, Caps) of
        {_, Remote} -> Remote;
        Other -> Other
    end.

is_client(OH) when is_binary(OH) -> binary:match(OH, <<"client">>) =:= {0, 6};
is_client(OH) -> is_client(iolist_to_binary(OH)).

prepare_request(Pkt, _Svc, _Peer) -> {send, Pkt}.
prepare_retransmit(Pkt, _Svc, _Peer) -> {send, Pkt}.

%% The answer goes back to the client as it came (diameter restores the Hop-by-Hop id).
handle_answer(Pkt, _Req, _Svc, _Peer) -> Pkt.
handle_error(Reason, _Req, _Svc, _Peer) -> {error, Reason}.

handle_request(_Pkt, _Svc, {_Peer, _Caps}) -> {relay, [{timeout, 2000}]}.
